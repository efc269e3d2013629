"""Mail: message texts (`messages`), the SMTP sender (`smtp`) and the outbox dispatcher
(`outbox`). See docs/people.md."""
