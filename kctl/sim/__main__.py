"""``python -m kctl.sim <sglang.launch_server args>``"""

from kctl.sim.lifecycle import main

if __name__ == "__main__":
    raise SystemExit(main())
