"""Fakes at the network edge: loopback servers that speak model providers' protocols."""
