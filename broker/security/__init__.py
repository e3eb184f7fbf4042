"""Security: the authorizer (ACLs) today; TLS, SASL and quotas join it here (issue 18)."""
