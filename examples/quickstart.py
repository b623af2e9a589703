"""A short search from Python: the tiny space on scikit-learn's digits, then its front.

    python examples/quickstart.py

About a minute on a laptop CPU. The study is stored in studies/quickstart.db: run the script
again and the search goes on where it stopped (the same settings resume the same study).
"""

import eas

eas.prepare_process()  # as the `eas` command does: threads wait passively, progress lines on stderr

result = eas.search(space="tiny", data="digits", trials=12, epochs=2, study="quickstart",
                    objectives=["accuracy", "macs", "params"], constraints={"max_macs": "1M"})

print(f"study {result.study}: {len(result.records)} trials, {len(result.front)} on the front, "
      f"hypervolume {result.hypervolume:.3f}")
print(f"{'trial':>5}  {'accuracy':>8}  {'MACs':>9}  {'params':>7}  genome")
for trial in result.front:
    mark = "*" if result.knee and trial.number == result.knee.number else " "
    m = trial.metrics
    print(f"{trial.number:>4}{mark}  {m['accuracy']:8.2%}  {m['macs']:9,}  {m['params']:7,}  {trial.genome}")
print("* the knee: the balanced trade-off. Export it with "
      "eas.export('quickstart', out='models/quickstart-knee') or `eas export quickstart --out ...`")
