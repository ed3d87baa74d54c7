"""The compute side: catalog, accounts, pools, quotas, leases, instances and usage."""
