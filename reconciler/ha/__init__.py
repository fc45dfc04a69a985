"""Running several replicas: leader election and repository shards."""
