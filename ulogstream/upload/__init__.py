"""Finished logs leaving the vehicle: description, the durable queue, targets and the shipper."""
