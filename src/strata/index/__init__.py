"""strata.index"""
