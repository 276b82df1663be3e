"""strata.store"""
