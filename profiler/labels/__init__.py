"""Labels on samples: for whom the code ran (a request's trace and span, its
route, a user's context), from what a process publishes. One module per
source; label_sources.LabelSources is what the rest of jitprof asks."""
