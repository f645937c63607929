"""A room's captions out to where audiences watch: YouTube Live's caption ingestion, OBS Studio (which puts them in
the stream it sends), configured per room (``POST /rooms/{id}/outputs``) and kept with it in the store."""
