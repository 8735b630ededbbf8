"""Continuous-query language: parse, compile and judge CQ queries (§3.1).

Pure Python, no Django: the doors and the fan-out call it.
"""
