"""The test's Python consumer: runs a reference consumer of examples/consumers (or the control
consumer) with a phase hook. Every step prints "PHASE <phase> <message id>"; with
STOP_PHASE=<phase> (and STOP_NTH=<n>, default 1) the n-th time that phase is reached it prints
"STOPPED <phase> <id>" and waits there, so the test can SIGKILL it at exactly that point.
    python3 consumer.py queue|stream|ack_first"""
import os
import pathlib
import sys
import threading

ROOT = pathlib.Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "examples/consumers"), str(ROOT / "test/brokers")]

seen = 0


def on_phase(phase, ident):
    global seen
    print(f"PHASE {phase} {ident}", flush=True)
    if phase == os.environ.get("STOP_PHASE"):
        seen += 1
        if seen == int(os.environ.get("STOP_NTH", "1")):
            print(f"STOPPED {phase} {ident}", flush=True)
            threading.Event().wait()  # until the test kills us


model = sys.argv[1]
module = __import__(f"{model}_consumer")
module.main(on_phase)
