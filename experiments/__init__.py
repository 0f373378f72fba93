"""rooflab: measure how a CPU drives a GPU and where each operation sits on the roofline."""
