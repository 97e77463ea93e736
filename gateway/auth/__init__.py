"""Who a client is: TLS (and its certificate reload), SASL (PLAIN, SCRAM) with kgw's
credentials, the principal builder's call, password hashing off the shared loop, and the
per-host record of failed logins."""
