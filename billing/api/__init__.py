"""The money side of the REST API (v1): statements with their lines, sign-off, disputes and
exports (``statements``), and budgets (``budgets``), through billing's services."""
