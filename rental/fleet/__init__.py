"""Everything that talks to a cloud: launching and failover (L1, L2), the agent's
installation, the sync, orphans and recovery, termination, spot interruptions (L7), stop
and resume (L9), replacement, and the cloud side of data volumes. Provider calls are
never made inside a database transaction. May import the loan model and the catalog;
applies the cloud's answers by calling the loan model directly."""
