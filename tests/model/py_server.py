"""One Python process that runs the model tests' reference scripts one after another, so that
torch and transformers are imported once per test program instead of once per script (~4.5 s
each on the 2-core machine; hf_parity runs twenty).

Requests come on stdin, one JSON object per line: {"script": PATH, "args": "shell-quoted args"}.
The script runs as __main__ with sys.argv set (as `python PATH ARGS` would); its exit code
(0 when it returns, SystemExit's code, 1 with the traceback on stderr for an exception) goes back
as one line on the file descriptor named by argv[1]."""
import json
import os
import runpy
import shlex
import sys
import traceback


def run(script, args):
    sys.argv = [script] + shlex.split(args)
    try:
        runpy.run_path(script, run_name="__main__")
        return 0
    except SystemExit as e:
        if e.code is None:
            return 0
        return e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: B902 -- whatever the script raised is its failure, not the server's
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def main():
    reply = os.fdopen(int(sys.argv[1]), "w", buffering=1)
    for line in sys.stdin:
        if not line.strip():
            continue
        req = json.loads(line)
        reply.write(f"{run(req['script'], req['args'])}\n")


if __name__ == "__main__":
    main()
