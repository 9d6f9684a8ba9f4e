"""Traffic classes: SLO classes with priorities, the router's wait-queue order and tenant
quotas (token buckets). Pure: no clock, no I/O; ``now`` comes in."""
