"""zoo.launch: start one job's processes on every node, from a typed job spec.

- ``job.py``: :class:`~zoo.launch.job.JobSpec` and ``resolve_job(cfg)``, the one place that reads
  ``DDP_CONFIG`` for launching (run once, on the command line).
- ``topology.py``: where this node and process sit (torchrun / Slurm / scheduler environment,
  else the DDP_CONFIG values it is given); called by ``resolve_job`` only.
- ``agreement.py``: what the nodes compare (config fingerprint, job identity), computed from the
  config by ``resolve_job``.
- ``launch.py``: ``launch(main, spec, *args)``: the node rendezvous, spawning, supervision and
  restarts; it never sees a config.
- ``rendezvous.py``: the node rendezvous at node 0's store, failure reports, restart rounds.
- ``heartbeat.py``: hung-rank detection in every rank; ``preemption.py``: SIGTERM / SIGUSR1.
- ``setup.py``: what every worker does first (logging, seeding, config.yaml).
- ``output_lock.py``: one training job per output folder (global rank 0 holds it while it trains).
"""
