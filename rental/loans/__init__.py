"""The loan model: admission (Q2, Q4), the queue (Q3, Q5), reclaim (Q6-Q8), bookings (R1-R4),
extension, L over time, ending, the due-time sweep, expiry (L5), quotas and pools (Q1),
billing stops, and the messages these send, each decision in a pure ``*_rules`` module
beside the service that applies it. It never touches a cloud and never imports the
fleet: cloud work is asked for by task name through ``rental.jobs``."""
