"""What the benches share, and the tests with them: everything in ``bench/`` that is imported rather than run.

Each module of ``bench/`` itself is a bench, run as ``python -m bench.NAME``; its parts live here:

- ``harness``: the bench server in a process of its own (``python -m bench.serve``), N WebRTC clients against it,
  CPU and memory of the server's process tree; ``client``: one WebRTC client streaming a recorded clip, with the
  messages it received and when; ``clips``: the clips the clients send (real English speech, encoded to Ogg Opus);
- ``metrics``: per-session latency, lag and WER from a client's messages and its clip's reference; ``churn``:
  partial churn and flicker; ``splits``: sentence splits inside a reference sentence;
- ``modes``: the server modes the benches compare (the shipped engine, Whisper's stock window, the serialized
  baseline, every session admitted);
- ``postgres``: a throwaway PostgreSQL server for a run; ``remote_viewer``: a room viewer on another front end;
  ``room_viewer``: a kiosk's view of a room; ``room_editing``: a room's editors and viewers over HTTP;
- ``speaker_labels``: speaker labels of a clip as a live session gives them, scored against its reference turns;
  ``recording``: a long recording of the shared clips; ``room_terms``: a room's vocabulary on recognised text;
  ``heap``: the C heap as glibc sees it.
"""
