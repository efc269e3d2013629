"""The accounts actor (one, key "accounts"): organizations, members, keys, projects,
invitations, people.

    actor.py        `AccountsActor`: organizations, members, keys, projects
    messages.py     what it takes
    people.py       sign-up, e-mail confirmation, password resets (handlers mixed into the actor)
    invitations.py  invitations and linked identities (handlers mixed into the actor)
    credentials.py  password and token rules shared with the sessions actor
    member_rules.py, org_rules.py   the pure rules it checks
"""
