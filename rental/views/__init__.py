"""The rental pages, by what they show: leases (and projects, approvals), capacity (pools,
quotas, extensions, bookings), images, volumes, and the agent's side of a lease (SSH keys,
stop and resume, replacement). Each view parses input, asks ``portal.access``, calls one
service or selector and renders."""
