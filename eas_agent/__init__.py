"""eas-agent: the measuring agent that runs on a deployment target, and the client EAS uses to
reach it. ONNX Runtime, numpy and the standard library only — no torch, no EAS — so that a
Raspberry Pi, a Jetson or a phone with Python can serve measurements:

    pip install ./eas_agent        # or: pip install 'eas-agent' next to onnxruntime
    EAS_AGENT_TOKEN=... eas-agent serve --port 8765

`measure` is the one way a model is timed in ONNX Runtime, here and in EAS's own process.
"""

__version__ = "0.1.0"
