"""Who may talk to the broker: SASL credentials and mechanisms (PLAIN, SCRAM-SHA-256/512),
TLS contexts, and the HTTP endpoint's authentication from the same credentials file."""
