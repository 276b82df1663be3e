"""strata.refstore"""
