"""strata.files"""
