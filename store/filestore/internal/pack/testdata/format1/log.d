tenure filestore pack, format 1
