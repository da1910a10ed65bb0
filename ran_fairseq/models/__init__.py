"""Registered by importing."""
