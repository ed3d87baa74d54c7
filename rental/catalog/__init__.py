"""What leases are made of: provider accounts and their credentials, exchange rates,
machine images, SSH keys, data volumes and storage intervals. Imports no other package of
``rental`` but the reads and the floor (models, providers, jobs)."""
