"""Tiered storage (RocketMQ RIP-65): confirmed history is copied per topic-queue to a slower,
cheaper tier — a POSIX directory or an S3 bucket — and can be read back from it alone."""
