"""Billing: rates, cost apportionment, monthly statements, budgets and exports."""
