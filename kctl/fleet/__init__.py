"""Fleets: one serving line on several GPU servers, rolled out as a canary then waves.

The fleet file (:mod:`kctl.fleet.spec`) says where and how many; the profile says what.
"""
