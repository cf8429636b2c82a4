#!/usr/bin/env python3
"""scripts/gcc12-coroutine-audit flags exactly the shapes GCC 12 miscompiles (docs/guide.md,
compiler note, case 4). Each shape below was compiled with g++-12 (-O0 and -O2) and clang++-14:
the `hit` ones are the ones whose body g++-12 skipped and clang ran. Usage: the test runs the
audit script given as argv[1] on one snippet at a time, in a temporary directory.
"""
import os
import subprocess
import sys
import tempfile

HEAD = 'Task<void> f(bool a, int& out) {\n'
HIT = {
    'if': 'if (co_await recv()) ++out;',
    'while': 'while (co_await recv()) { ++out; break; }',
    'do while': 'do { ++out; } while (!co_await recv());',
    'for condition': 'for (; co_await recv();) { ++out; break; }',
    'for condition after an assignment': 'for (out = 0; co_await recv();) { ++out; break; }',
    'switch with labels': 'switch (co_await recv()) { case true: ++out; break; default: break; }',
    'else if': 'if (a) ++out; else if (co_await recv()) ++out;',
    'after a cast to unsigned char': 'out = static_cast<unsigned char>(1);\n'
                                     'if (co_await recv()) ++out;',
}
MISS = {
    'a local first': 'int x = 1; if (co_await recv()) out += x;',
    'a local after': 'if (co_await recv()) ++out; int x = 1; out *= x;',
    'a local in a block': 'if (co_await recv()) { int x = 1; out += x; }',
    'an array local': 'std::byte buffer[4]; if (co_await recv()) out += sizeof buffer;',
    'the condition declares': 'if (bool b = co_await recv()) ++out;',
    'a static local': 'static int k = 1; if (co_await recv()) out += k;',
    'a range for': 'for (int& x : xs) if (co_await recv()) out += x;',
    'a conditional expression': 'co_await recv() ? ++out : --out;',
}


def audit(script, snippet, member=False):
    text = ('struct S { Task<void> f(bool a, int& out); };\nTask<void> S::f(bool a, int& out) {\n'
            if member else HEAD) + snippet + '\n}\n'
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, 'case.cpp')
        with open(path, 'w') as f:
            f.write(text)
        run = subprocess.run([sys.executable, script, path], capture_output=True, text=True)
    return run.returncode == 1 and 'case.cpp:' in run.stdout


def main():
    script = sys.argv[1]
    failures = []
    for name, snippet in HIT.items():
        for member in (False, True):
            if not audit(script, snippet, member):
                failures.append(f'missed: {name}{" (member function)" if member else ""}')
    for name, snippet in MISS.items():
        if audit(script, snippet):
            failures.append(f'flagged, though GCC 12 compiles it correctly: {name}')
    for failure in failures:
        print(failure)
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
