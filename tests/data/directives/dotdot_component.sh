#!/bin/bash
#RSA_DATA_OUT=/gpfs/alice/../bob/out
