"""Cloud provider drivers: one small contract (``base``), one module per cloud.

Plain data in, frozen dataclasses out, ``ProviderError`` for every failure. Cloud SDKs
(boto3) are imported in this package and nowhere else; nothing here imports Django.
"""
