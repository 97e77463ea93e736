"""kgw's metadata: the KRaft-style record log, its snapshots and stores, and the image
replayed from it (ACLs, dynamic configs, SCRAM credentials)."""
