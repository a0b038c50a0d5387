"""The problem a study tunes (model, data, space, requirement) as this machine's backends run it, and its fp32 reference."""
