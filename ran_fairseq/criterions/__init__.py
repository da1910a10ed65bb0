"""Criterions; registered by importing."""
