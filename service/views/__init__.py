"""Views: functions that shape stored rows into the spec's response objects, and the read-only
feeds built from them. Actors, routes and streams all call these, so one shape has one home.
They read through service/storage at most; they own nothing and send no messages."""
