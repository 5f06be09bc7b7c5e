import re,sys,collections
rows=collections.defaultdict(lambda: collections.defaultdict(list)); order=[]
cur=None
for line in open(sys.argv[1]):
    m=re.match(r'== round (\d+) (\w+)',line)
    if m:
        cur=m.group(2)
        if cur not in order: order.append(cur)
        continue
    parts=re.split(r'\s{2,}',line.strip())
    rows[parts[0]][cur].append((float(parts[2]), parts[-1]))
for k,v in rows.items():
    out=f"{k:18s}"
    for b in order:
        x=v[b]; s=sorted(x)
        out+=f" | {b}: {' '.join('%.2f'%y[0] for y in x)} (min {s[0][0]:.2f} {s[0][1]} med {s[len(s)//2][0]:.2f})"
    print(out)
