import pandas as pd
from spartan_py.trace import read_trace
t=read_trace('benchmarks/results/fidelity/calibrate-wide-h100.trace.csv.gz')
print(t.columns.tolist())
g=t.groupby('run').agg(n=('kernel','size'), us=('measured_us','sum'))
print(g.head(40), len(g), g.us.sum()/1e6)
print(t[['run','kernel','variant','rows_in','measured_us']].head(12).to_string())
