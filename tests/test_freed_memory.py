"""Loader workers keep freed memory for reuse (zoo.utils.env.keep_freed_memory)."""

import subprocess
import sys
import textwrap

import pytest

# Minor page faults of each of twenty 64 MB blocks allocated, touched and freed in turn, before and
# after the call: the fewest. With the call, glibc needs a few rounds (3-8 seen) before a freed
# chunk fits the next 64-byte-aligned request; from then on the pages are reused.
_FAULTS = textwrap.dedent("""
    import resource, torch
    from zoo.utils.env import keep_freed_memory

    def fewest_faults():
        faults = []
        for i in range(20):
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            t = torch.empty(64 << 20, dtype=torch.uint8)
            t.fill_(1)
            faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
            del t
        return min(faults)

    print(fewest_faults(), keep_freed_memory(), fewest_faults())
""")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's mallopt: Linux only")
def test_a_block_freed_and_allocated_again_does_not_fault_again():
    out = subprocess.run([sys.executable, "-c", _FAULTS], capture_output=True, text=True,
                         check=True).stdout.split()
    fresh, kept, reused = int(out[0]), out[1], int(out[2])
    pages = (64 << 20) // 4096
    assert kept == "True"
    assert fresh > pages // 2, out  # glibc unmapped the block: every page faulted again
    assert reused < pages // 20, out
