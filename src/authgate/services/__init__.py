"""The flows: plain values in, dataclasses out. No web framework, no SQL."""
