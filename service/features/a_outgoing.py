"""One outgoing-HTTP sender per node (SSRF guard, CA file, 10 s limit), shared by job
webhooks and account-webhook delivery. Named to attach before the features that use it."""


def attach(services) -> None:
    from service.net.client import Sender

    s = services.settings
    services.sender = Sender(allow_private=s.webhook_allow_private, ca_file=s.webhook_ca_file)
    services.closers.append(services.sender.aclose)
