"""The local EC2-compatible endpoint (moto behind a fault injector) for the demo, the tests
and the benches. Product code never imports it (an import contract in pyproject.toml)."""
