"""``accel campaign``: the conformance suite over many machines and devices, on Ray (docs/fleet.md).

- ``plan``: the campaign's settings and its shards (slices of the suite's own case plan, property
  searches, fuzz seeds), the same for every platform;
- ``node``: what runs on a node: its devices and Ray resources, running one shard;
- ``store``: the campaign folder: one JSON-lines file per platform written as shards finish,
  ``campaign.json``, and the per-platform ``accel.conformance/1`` files;
- ``fleet``: the Ray side: joining or starting a cluster, finding each node's devices, one worker
  per device, the shard queue with retries;
- ``cli``: the command.

Ray is the optional extra ``accel-portable[fleet]``; only ``fleet`` imports it.
"""
