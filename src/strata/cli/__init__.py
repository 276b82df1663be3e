"""strata.cli"""
