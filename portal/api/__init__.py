"""The REST API (v1): the shared parts every app's endpoints use.

``errors`` maps every failure to one JSON shape, ``auth`` reads personal tokens,
``throttling`` limits per token and per user, ``pagination`` and ``views`` are the
base every list and action builds on, and ``urls`` mounts each app's endpoints
under ``/api/v1/`` beside the schema and its offline docs.
"""
