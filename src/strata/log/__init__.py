"""strata.log"""
