"""How rows move between ranks: the halo plan (routes of one Alltoallv), the node-aware
plan and its shared-memory windows, persistent requests, the node map and the two-tier
cost model.
"""
