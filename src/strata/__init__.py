"""strata: a durable message store and broker."""
__version__ = "0.1.0"
