"""What signing (HMAC-SHA256, tokenwire.transport key=) adds to an out-of-band request round trip.

    python bench/bench_transport.py                 # ISL 1k / 40k / 128k, table + target
"""

import sys

from tokenwire.benchmarks.transport import main

if __name__ == "__main__":
    sys.exit(main())
