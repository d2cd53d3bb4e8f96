"""Queue-depth autoscaling on a simulated fleet: writes benchmarks/results/autoscaling_*.

    python benchmarks/autoscaling/simulate.py   (same as python -m kubellm.operator.autoscaling.simulate)
"""
import sys

from kubellm.operator.autoscaling.simulate import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
