# A busy node service for the soak: one long-lived worker, and after
# CHURN_DELAY seconds short node and native processes coming and going (about
# three a second) until the file CHURN_STOP exists.
cd "$(dirname "$0")/../.."
node -e 'function f(n){let s=0;for(let i=0;i<n;i++)s=(s*31+i)%1000003;return s} let x=0; setInterval(()=>{x+=f(2e6)},20)' &
sleep "${CHURN_DELAY:-0}"
while [ ! -e "${CHURN_STOP:-/nonexistent}" ]; do
  node fixtures/js/workload.js 3 >/dev/null
  fixtures/build/dwarf_cases recursion 0.05 now
  sleep 0.3
done
wait
