"""What leaves EAS: export (arch.json, weights, ONNX, a standalone model.py that needs no EAS),
the exported files as text (arch_files, torch-free), and compression of an export (int8 with
ONNX Runtime, structured pruning)."""
