"""Scale-out: sharded index files (no extra needed) and Ray backends for teacher labelling and shard search (`scale` extra)."""
