"""Offline export of recorded ULog files: CSV, ROS 1 bag and MCAP.

Import the exporters from their modules (:func:`ulogstream.export.csv.export_csv`,
:func:`ulogstream.export.rosbag.export_rosbag`, :func:`ulogstream.export.mcap.export_mcap`);
nothing is re-exported here because the bag and MCAP writers need the optional ``export``
extras (rosbags, mcap), which importing this package must not require.
"""
