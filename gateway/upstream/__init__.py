"""The brokers behind kgw: the cluster kgw learned (versions, nodes, topic ids), its own
connections to it, and the TLS/SASL kgw uses towards it."""
